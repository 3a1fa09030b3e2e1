"""Child processes, the garbage collector's tuning and loopback addresses: the operating system's side."""
