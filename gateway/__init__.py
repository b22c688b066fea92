"""gateway: the S3 API (starlette + uvicorn), auth, S3 semantics and the metadata store."""
