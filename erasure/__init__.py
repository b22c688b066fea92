"""erasure: 8+2 Reed-Solomon striping (pyeclib / ISA-L), placement, and fragment I/O to nodes."""
