"""The gateway's storage adapter over the erasure layer, and the self-describing records it keeps
on the nodes (delete and bucket markers, tag archives) so that `recover-metadata` can rebuild
the metadata store from the nodes alone."""
