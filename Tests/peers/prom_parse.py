"""Parses the Prometheus text format on stdin with prometheus_client's parser (the reference
Python implementation) and prints one JSON object: {"families": {name: type}, "samples":
{"name{label=value,...}": value}} with labels sorted. Exits 1 with the parser's error on bad input."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    text = sys.stdin.read()
    families = {}
    samples = {}
    try:
        for family in text_string_to_metric_families(text):
            families[family.name] = family.type
            for s in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                samples[f"{s.name}{{{labels}}}"] = s.value
    except Exception as e:  # the parser raises ValueError and others on malformed input
        print(f"unparsable: {e}", file=sys.stderr)
        sys.exit(1)
    json.dump({"families": families, "samples": samples}, sys.stdout)


if __name__ == "__main__":
    main()
