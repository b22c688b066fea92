"""S3 operations, one module per family; each handler takes an `S3Request` and returns a Response."""
