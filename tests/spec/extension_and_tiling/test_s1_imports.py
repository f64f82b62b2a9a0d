"""docs/spec/extension-and-tiling.md §1 Imports: every name is one object in its module and in
`strideweave`."""
import strideweave as sw
from strideweave.carriers import extension as ext

PUBLIC = ["CarrierDefinition", "StorageProvider", "TransferProvider", "TransferRoute",
          "TransferRequest", "PreparedTransfer", "Unsupported", "ProviderCompletion",
          "CarrierFacet", "register_carrier_definition"]


def test_public_names_are_one_object_in_both_namespaces():
    assert sorted(ext.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(sw, name) is getattr(ext, name)
