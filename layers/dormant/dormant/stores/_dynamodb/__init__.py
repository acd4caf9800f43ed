"""Internals of :class:`dormant.stores.DynamoDBStore`: item layout, read window, S3 offload."""
