"""The library: Memory in process, the HTTP clients and the settings that change without a restart."""
