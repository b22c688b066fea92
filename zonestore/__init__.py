"""zonestore: zoned drives (emulated and real, through libzbd) packed as append-only zone logs,
the drive pool of a storage node, and the node daemon that serves fragment archives."""
