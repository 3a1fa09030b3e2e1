"""``compassmem wait-ready``: wait until a query API answers ``/healthz``.

``compassmem dev &`` returns at once, and its API listens seconds later (broker, model, stores): a request sent in
between fails (curl exits 7, silently with ``-s``). A script waits with this command, which ends with the API's URL
on stdout once it answers, or with exit 1 and one line saying what it waited for when it does not in time.
"""

from __future__ import annotations

import argparse
import sys
import time

from compassmem.core.config import Settings
from compassmem.core.terminal import echo

DEFAULT_TIMEOUT_S = 120.0
POLL_S = 0.25


def serving_url(settings: Settings) -> str:
    """The API of the `compassmem dev` running on the data directory, once it announced it; else the address the
    settings give (COMPASSMEM_API_HOST, COMPASSMEM_API_PORT)."""
    from compassmem.cli.status import api_url
    from compassmem.system.dev_server import running_dev

    dev = running_dev(settings.data_dir)
    return dev.api_url if dev is not None and dev.api_url else api_url(settings)


def cmd_wait_ready(args: argparse.Namespace, settings: Settings) -> int:
    import httpx

    deadline = time.monotonic() + args.timeout
    while True:
        # Looked up again each time: the dev's announcement comes once its API listens.
        url = (args.url or serving_url(settings)).rstrip("/")
        try:
            response = httpx.get(f"{url}/healthz", timeout=2)
            if response.status_code == 200:
                echo(url)
                return 0
            last = f"/healthz answered {response.status_code}: {response.text[:300]}"
        except httpx.HTTPError as error:
            last = f"{type(error).__name__}: {error}"
        if time.monotonic() >= deadline:
            echo(f"error: no compassmem API answered {url}/healthz within {args.timeout:g} s ({last}); is "
                 "`compassmem dev` running (its output says why it stopped), or is the API at another --url?",
                 file=sys.stderr)
            return 1
        time.sleep(POLL_S)


def add_wait_ready_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    command = commands.add_parser(
        "wait-ready", help="wait until the query API answers (after `compassmem dev &`), then print its URL",
        description="Poll GET /healthz until it answers 200 (the API listens and both stores answer), then print "
                    "the API's URL and exit 0; exit 1 with the last answer when it does not within --timeout. "
                    "Without --url: the API of the `compassmem dev` running on the data directory, as it announces "
                    "itself there once it listens, else COMPASSMEM_API_HOST:COMPASSMEM_API_PORT.")
    command.add_argument("--url", help="the API's base URL (default: see above)")
    command.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                         help=f"give up after this long (default {DEFAULT_TIMEOUT_S:g})")
    command.set_defaults(handler=cmd_wait_ready)
