"""Moving memory between stores: ``compassmem export`` writes a tenant or one conversation as JSONL, ``compassmem
import`` restores such a file into stores that do not hold its conversations yet.

``records`` is the file format, ``exporter`` reads the stores page by page into it, ``reader`` validates a file
line by line into whole conversations, ``importer`` writes those through the stores' own write path.
"""
