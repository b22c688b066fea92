"""The one compiled module: multi-buffer MD5 (gateway/s3/md5lanes.c). Everything else is in
pyproject.toml. Optional: where it cannot be built, gateway/s3/md5lanes.py uses hashlib."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "gateway.s3._md5lanes", ["gateway/s3/md5lanes.c"], depends=["gateway/s3/md5lanes_x8.h"],
    extra_compile_args=["-O3"], optional=True)])
