"""The `zonegate` command line: the entry point (`main.py`) and the gateway's own tools
(`dev`, `status`, `user`)."""
