"""The command line's parser: argparse's, except that a mistyped command gets one line naming the closest command
(``compassmem ingset`` -> did you mean 'ingest'?) instead of the usage and every command's name."""

from __future__ import annotations

import argparse
import difflib
from typing import Any


class CommandParser(argparse.ArgumentParser):
    """Its subcommands' parsers are of this class too (argparse makes them of the parent's class)."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:  # noqa: ANN401 - argparse's signature
        # The check argparse makes of a command's name before choosing its parser (Python 3.14 suggests by itself).
        commands = action.choices
        if isinstance(action, argparse._SubParsersAction) and commands is not None and value not in commands:
            closest = difflib.get_close_matches(str(value), list(commands), n=1)
            hint = f"; did you mean '{closest[0]}'?" if closest else f" (commands: {', '.join(commands)})"
            self.exit(2, f"{self.prog}: unknown command '{value}'{hint}\n")
        super()._check_value(action, value)
