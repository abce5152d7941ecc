"""Writes shared/aws/data/on_demand_prices.json from upstream's generated on-demand price tables.

aws/karpenter-provider-aws publishes its starting prices as Go source
(`pkg/providers/pricing/zz_generated.pricing_aws*.go`: a map of region -> instance type -> USD
per hour). This reads those files, checks every price and writes the JSON table the catalog
loads; upstream's files are inputs only and are not kept here. The China table is in CNY, so a
`cn-` region is refused rather than mixed into a USD table.

    python -m tools.aws_prices PATH.go [PATH.go ...]          # rewrite the committed table
    python -m tools.aws_prices --check PATH.go [PATH.go ...]  # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from shared.aws.pricing import parse_on_demand_table

TABLE = Path(__file__).resolve().parents[1] / "shared" / "aws" / "data" / "on_demand_prices.json"
_REGION = re.compile(r'^\s*"(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)":\s*\{\s*$')
_PRICE = re.compile(r'"(?P<type>[a-z0-9][a-z0-9.-]*)":\s*(?P<price>[0-9]+(?:\.[0-9]+)?)')
_CLOSE = re.compile(r"^\s*\},?\s*$")


class GoTableError(ValueError):
    pass


def parse_go_table(text: str, source: str = "<go>") -> dict[str, dict[str, float]]:
    """{region: {instance type: price}} from one generated Go file; every region block must
    close and hold prices, and no region or type may appear twice."""
    table: dict[str, dict[str, float]] = {}
    region: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if region is None:
            if (opened := _REGION.match(line)) is not None:
                region = opened["region"]
                if region in table:
                    raise GoTableError(f"{source}:{number}: region {region} appears twice")
                if region.startswith("cn-"):
                    raise GoTableError(f"{source}:{number}: {region} is priced in CNY, not USD")
                table[region] = {}
            continue
        if _CLOSE.match(line):
            if not table[region]:
                raise GoTableError(f"{source}:{number}: region {region} holds no prices")
            region = None
            continue
        code = line.split("//", 1)[0]
        for found in _PRICE.finditer(code):
            name = found["type"]
            if name in table[region]:
                raise GoTableError(f"{source}:{number}: {region} prices {name} twice")
            table[region][name] = float(found["price"])
    if region is not None:
        raise GoTableError(f"{source}: region {region} never closes")
    if not table:
        raise GoTableError(f"{source}: no region found (is it zz_generated.pricing_aws*.go?)")
    return table


def render(paths: list[Path]) -> str:
    merged: dict[str, dict[str, float]] = {}
    for path in paths:
        for region, prices in parse_go_table(path.read_text(), str(path)).items():
            if region in merged:
                raise GoTableError(f"{path}: region {region} is already in an earlier file")
            merged[region] = prices
    ordered = {region: dict(sorted(merged[region].items())) for region in sorted(merged)}
    text = json.dumps(ordered, indent=2) + "\n"  # a type per line: a price change is a one-line diff
    parse_on_demand_table(text)  # the table the catalog will load must pass its own checks
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.aws_prices", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="zz_generated.pricing_aws*.go files")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table differs")
    parser.add_argument("--out", type=Path, default=TABLE, help=f"where to write (default {TABLE})")
    args = parser.parse_args(argv)
    try:
        text = render(args.paths)
    except (OSError, ValueError) as exc:
        print(f"aws_prices: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python -m tools.aws_prices {' '.join(map(str, args.paths))}")
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    regions = parse_on_demand_table(text)
    print(f"wrote {args.out}: {', '.join(f'{r} ({len(p)} types)' for r, p in sorted(regions.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
