"""The S3 wire protocol: errors, XML, checksums, client numbers, CORS and tag rules, request auth.

Pure code: nothing here does I/O or knows the metadata store or the cluster."""
