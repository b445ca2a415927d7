import pytest

from mocapline.core.options import EnvArgumentParser, env_name, parse_index_list, parse_settings


def parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="t")
    p.add_argument("--merge-window-ms", type=float, default=50.0, help="w")
    p.add_argument("--ports", type=int, nargs="+", default=[7014], help="p")
    p.add_argument("--verbose", action="store_true", help="v")
    p.add_argument("--mode", choices=("a", "b"), default="a", help="m")
    return p


def test_env_name() -> None:
    assert env_name("--merge-window-ms") == "MOCAPLINE_MERGE_WINDOW_MS"


def test_flag_beats_env_beats_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parser().parse_args([]).merge_window_ms == 50.0
    monkeypatch.setenv("MOCAPLINE_MERGE_WINDOW_MS", "20")
    monkeypatch.setenv("MOCAPLINE_PORTS", "7014,7015")
    monkeypatch.setenv("MOCAPLINE_VERBOSE", "yes")
    args = parser().parse_args([])
    assert (args.merge_window_ms, args.ports, args.verbose) == (20.0, [7014, 7015], True)
    assert parser().parse_args(["--merge-window-ms", "5"]).merge_window_ms == 5.0


def test_bad_env_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCAPLINE_MODE", "c")
    with pytest.raises(SystemExit, match="MOCAPLINE_MODE"):
        parser()
    monkeypatch.setenv("MOCAPLINE_MODE", "a")
    monkeypatch.setenv("MOCAPLINE_MERGE_WINDOW_MS", "fast")
    with pytest.raises(SystemExit, match="MOCAPLINE_MERGE_WINDOW_MS"):
        parser()


def test_help_names_env_var() -> None:
    assert "MOCAPLINE_MERGE_WINDOW_MS" in parser().format_help()


def test_index_list() -> None:
    assert parse_index_list("5,9-12, 20") == [5, 9, 10, 11, 12, 20]
    assert parse_index_list("") == []


def test_settings_the_flags_allow_but_the_settings_refuse_are_one_line_and_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    parser = EnvArgumentParser(prog="mocapline thing")
    parser.add_argument("--rate", type=float, default=60.0)

    def make(args) -> float:
        if args.rate > 500:
            raise ValueError(f"--rate {args.rate:g}: at most 500")
        return args.rate

    assert parse_settings(make, parser, ["--rate", "120"]) == 120.0
    assert parse_settings(make, parser, ["--rate", "900"]) is None
    assert capsys.readouterr().err == "mocapline thing: --rate 900: at most 500\n"
