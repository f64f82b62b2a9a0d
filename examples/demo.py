import strideweave as sw
print("strideweave", sw.__version__)
