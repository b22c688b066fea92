"""`zonegate` subcommands that take --config find ./data/zonegate.toml (where `zonegate dev`,
i.e. `make run`, writes it) when --config is left out, and say in one line when it is not
there."""

from __future__ import annotations

import pytest

from gateway.cli import main as cli


def test_missing_default_config_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for argv in (["status"], ["repair"], ["user", "list"], ["recover-metadata"],
                 ["metadata", "migrate"], ["bucket-markers"]):
        assert cli.main(argv) == 1, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert "no --config given and no ./data/zonegate.toml" in err


def test_default_config_is_found_and_an_explicit_one_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "zonegate.toml").write_text("")
    parser = cli.build_parser()
    for argv, want in ((["user", "list"], "data/zonegate.toml"),
                       (["user", "list", "--config", "other.toml"], "other.toml"),
                       (["repair"], "data/zonegate.toml")):
        args = parser.parse_args(argv)
        cli.resolve_config(args)
        assert args.config == want


@pytest.mark.parametrize("command", ["status", "repair", "node", "serve"])
def test_help_names_the_default(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    assert "default ./data/zonegate.toml" in " ".join(capsys.readouterr().out.split())
