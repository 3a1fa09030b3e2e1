"""What counts as this machine alone: loopback bind addresses and Host names.

The servers that answer without a key (the query API of ``compassmem api`` and ``compassmem dev``, the MCP server of
``compassmem mcp``) refuse to listen beyond loopback unless told ``--insecure-no-auth``; the query API also answers
only Host names that are this machine's own (or listed), so that a web page whose name an attacker rebinds to
127.0.0.1 (DNS rebinding) cannot use the browser to reach it.
"""

from __future__ import annotations

import ipaddress
import re

LOOPBACK_NAME = "localhost"
_DNS_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")


def is_loopback_host(host: str) -> bool:
    """Whether a bind address or a Host name is this machine only: ``localhost`` (any case, a trailing dot too), an
    address of 127.0.0.0/8, or ``::1`` (brackets allowed). A wildcard (``0.0.0.0``, ``::``) or any other name is not.
    """
    name = host.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == LOOPBACK_NAME:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host part of a ``Host`` header, lower case, without port, brackets or a trailing dot: ``[::1]:8080`` ->
    ``::1``, ``Example.com.:80`` -> ``example.com``."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    name, colon, port = value.rpartition(":")
    return (name if colon and port.isdigit() else value).rstrip(".")


def host_name(entry: str) -> str:
    """A host name or address as configured (``Memory.Example.``, ``[::1]``) in the form ``host_of`` gives, or
    ValueError: no scheme, no port, no path."""
    name = entry.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if _DNS_NAME.fullmatch(name):
        return name
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        raise ValueError(f"{entry!r} is not a host name or address (give it without scheme, port or path, e.g. "
                         "'memory.example.com')") from None
