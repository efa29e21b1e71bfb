#!/usr/bin/python3
"""Validates JSON instances against a JSON schema with python3-jsonschema (Debian's), the
independent validator of the grammar tests: formats are checked too (date, time, date-time,
uuid, email). Usage: validate_json.py SCHEMA.json < instances, one JSON document per line
(split on '\\n' only: a raw U+2028 inside a string is not a line break). Prints one line per
invalid instance and exits 1 if any instance does not parse or does not validate."""
import json
import sys

import jsonschema


def strict_constant(name):
    raise ValueError(f"not JSON: {name}")


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    text = sys.stdin.buffer.read().decode("utf-8")
    bad = 0
    count = 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        count += 1
        try:
            instance = json.loads(line, parse_constant=strict_constant)
        except ValueError as e:
            print(f"does not parse: {e}: {line!r}")
            bad += 1
            continue
        errors = sorted(validator.iter_errors(instance), key=str)
        if errors:
            print(f"invalid: {errors[0].message}: {line!r}")
            bad += 1
    print(f"{count - bad}/{count} valid")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
