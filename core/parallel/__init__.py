"""Data parallelism over ``torch.distributed`` (DDP or FSDP2): one process per rank; every
helper here is a no-op in a single-process run."""
