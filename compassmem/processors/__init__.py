"""Pure processors: segmentation, merging, relations, reclustering, time resolution. No Kafka here."""
