"""`config_file.plain_json`: a config file written as JSON is read without PyYAML, and only
when YAML reads it as the same value."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from clef_pipelines.config_file import ConfigError, plain_json, read_config_file
from tests.test_config_light import same

# Texts on both sides of each rule of `plain_json`, and of what YAML 1.1 reads differently.
CORPUS = [
    '{"a":1}',
    '{"a" :1, "b" : [ 1 , 2 ] }',
    '{"a": 1.5, "b": -0, "c": 10.0, "d": 2.50, "e": -3}',
    '{"a": 0.1e1}',
    '{"a": 1E5}',
    '{"a": 1.0e+3}',
    '{"a": NaN}',
    '{"a": -Infinity}',
    '{"a": 100000000000000000000000}',
    '{"a": true, "b": false, "c": null}',
    '{"a": "on", "b": "yes", "c": "null", "d": "~", "e": "0x1F", "f": "1_000", "g": ""}',
    '{"a": "x: y # z", "b": "#x", "c": "&a", "d": "*a", "e": "!x", "f": "%", "g": "- x"}',
    '{"a": "  spaced  ", "": 1, "<<": {"b": 1}}',
    '{"a":1, "a":2}',
    '{"a": {}, "b": [], "c": [{}], "d": [[]]}',
    "[1, 2]",
    '"a string"',
    "3",
    "null",
    "{}",
    '\n\n{"a": 1}\n\n',
    '{\r\n  "a": 1\r\n}\r\n',
    '{\n"a":\n[1,\n2]}',
    '{"a"\n: 1}',
    '{"a"\r\n: 1}',
    '{"a":\t1}',
    '{"a": "tab\tinside"}',
    '{"a": "\\u00e9"}',
    '{"a": "\\"quoted\\""}',
    '{"a": "caf\u00e9"}',
    '{"a": "line\u2028sep"}',
    '{"a": "\u0085"}',
    '\ufeff{"a": 1}',
    '{"a": "x"}\n---\n',
    '{"a": 1,}',
    '{"a": 1} # comment',
    '{"' + "k" * 999 + '": 1}',
    '{"' + "k" * 1001 + '": 1}',
    '{"' + "k" * 1100 + '": 1}',
    '{"a": "' + "v" * 5000 + '"}',
    '{"data_dir": "/tmp/x/state", "clef": {"backend": "self-hosted", '
    '"base_url": "http://127.0.0.1:8080", "cache": false}}',
    "data_dir: /tmp/x\nclef:\n  backend: off\n",
    "{a: 1}",
]


def yaml_reads(text: str) -> tuple[bool, Any]:
    try:
        return True, yaml.safe_load(text)
    except yaml.YAMLError:
        return False, None


def check(text: str) -> bool:
    """plain_json agrees with YAML on `text`; True when it took the text."""
    took, value = plain_json(text)
    if took:
        ok, expected = yaml_reads(text)
        assert ok, f"plain_json read what YAML refuses: {text[:200]!r}"
        assert same(value, expected), (text[:200], value, expected)
    else:
        assert value is None
    return took


def test_plain_json_agrees_with_yaml_on_the_corpus() -> None:
    took = [text for text in CORPUS if check(text)]
    # The rules take plain JSON and leave the rest to YAML (so the check above is not empty).
    assert '{"a":1}' in took and '{"' + "k" * 999 + '": 1}' in took
    refused = set(CORPUS) - set(took)
    for text in ('{"a": 0.1e1}', '{"a"\n: 1}', '{"a":\t1}', '{"a": "\\u00e9"}', "{a: 1}"):
        assert text in refused
    assert '{"' + "k" * 1100 + '": 1}' in refused


KEYS = ["a", "on", "no", "-", "x y", "k:v", "#", "&", "*", "!", "?", "|", ">", "%", "@", "`", "<<"]
STRINGS = [*KEYS, "", " lead", "trail ", "1", "0x1F", "1_000", "1e3", ".5", "~", "null", "true"]
STRINGS += ["yes", "Off", "2026-12-06", "12:30", "a\nb", 'q"q', "tab\t", "caf\u00e9", "[1]", "{}"]


def random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.randint(-(10**6), 10**6)
    if kind == 1:
        return rng.choice(
            [rng.uniform(-1e3, 1e3), rng.uniform(-1e-6, 1e-6), float(rng.randint(0, 9))]
        )
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4, 5):
        return rng.choice(STRINGS)
    if kind in (6, 7):
        return {rng.choice(KEYS): random_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def reformat(text: str, rng: random.Random) -> str:
    """`text` with random spaces and line ends between JSON's tokens."""
    out, in_string, escaped = [], False, False
    for ch in text:
        out.append(ch)
        if in_string:
            in_string = escaped or ch != '"'
            escaped = not escaped and ch == "\\"
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[,:" and rng.random() < 0.5:
            out.append(rng.choice([" ", "  ", "\n", "\r\n", "\n    "]))
    return "".join(out)


@pytest.mark.parametrize("seed", range(4))
def test_plain_json_agrees_with_yaml_on_random_documents(seed: int) -> None:
    rng = random.Random(seed)
    took = 0
    for _ in range(500):
        value = {rng.choice(KEYS): random_value(rng, 1) for _ in range(rng.randrange(1, 5))}
        ascii_only = rng.random() < 0.5
        text = json.dumps(value, ensure_ascii=ascii_only, indent=rng.choice([None, 0, 2]))
        took += check(text)
        took += check(reformat(text, rng))
        before_colon = text.replace('":', '"\n:', 1)
        assert not plain_json(before_colon)[0] or before_colon == text
    assert took > 100  # plain documents are common enough that the agreement is tested


def test_yaml_and_its_errors_still_name_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("clef:\n  backend: off\n")
    assert read_config_file(cfg) == {"clef": {"backend": False}}
    cfg.write_text('{"clef": {"backend": "off"},}\n  - x')
    with pytest.raises(ConfigError, match=f"cannot read config file {cfg}"):
        read_config_file(cfg)
    cfg.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a mapping at the top level"):
        read_config_file(cfg)
    cfg.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ConfigError, match=f"cannot read config file {cfg}"):
        read_config_file(cfg)


def test_a_top_level_key_that_is_not_a_name_is_refused_naming_the_file(tmp_path: Path) -> None:
    """YAML reads `1: x` and `true: x` as an int and a bool key; passed on as keyword arguments
    they crashed every command with "keywords must be strings"."""
    from clef_pipelines.config import load_settings
    from clef_pipelines.config_sections import load_compact_settings

    cfg = tmp_path / "clef-pipelines.yaml"
    for text, key in (("1: x\n", "1"), ("collection: docs\ntrue: x\n", "True")):
        cfg.write_text(text)
        for load in (read_config_file, load_settings, load_compact_settings):
            with pytest.raises(ConfigError, match=f"(?s){cfg}.*unknown key {key}"):
                load(cfg)
