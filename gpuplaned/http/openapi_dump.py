"""``python -m gpuplaned.http.openapi_dump [FILE]``: the OpenAPI document as JSON, without a daemon.

``npm run gen:types`` in web/ reads it to write the UI's wire types (web/src/api/openapi.ts),
and tests/ui/test_api_types.py to check that file is current. Keys keep the declaration
order, so a field's place in the generated types follows its class.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuplaned.http.openapi import document


def dump() -> str:
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python -m gpuplaned.http.openapi_dump [FILE]  (no FILE: standard output)", file=sys.stderr)
        return 2
    if argv:
        Path(argv[0]).write_text(dump(), encoding="utf-8")
    else:
        sys.stdout.write(dump())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
