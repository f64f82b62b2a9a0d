"""Shared by the Ray carrier tests: a two-node Ray cluster on this machine
(`ray.cluster_utils.Cluster`, loopback only, each node with its own small object store), this
test process its driver. Import it before Ray (it sets Ray's address resolution); it imports
Ray only when a cluster starts, so a module may import it and then skip without Ray."""
import os

# Before Ray is imported: resolve this machine's node address to loopback (Ray otherwise
# advertises the external interface), so all cluster traffic stays on 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

MiB = 1 << 20
NODE = dict(num_cpus=1, object_store_memory=100 * MiB, node_ip_address="127.0.0.1")


def two_node_cluster():
    """A generator for a module-scoped fixture: yields `(cluster, node_b)`, where node B has
    the custom resource "node_b"; shuts Ray and the cluster down afterwards, also on failure."""
    import ray
    from ray.cluster_utils import Cluster
    c = Cluster()
    try:
        c.add_node(**NODE, include_dashboard=False)
        node_b = c.add_node(**NODE, resources={"node_b": 1})
        ray.init(address=c.address, log_to_driver=False, logging_level="ERROR")
        c.wait_for_nodes()
        yield c, node_b
    finally:
        ray.shutdown()
        c.shutdown()
