"""`zonegate dev`'s option checks: a bad value is a one-line usage error before anything
starts."""

from __future__ import annotations

import pytest

from gateway.cli import dev
from gateway.cli import main as cli


@pytest.mark.parametrize("bad", ["5", "5x", "0s", "-1s", "1.5s", ""])
def test_a_bad_prometheus_interval_is_a_usage_error(bad, capsys):
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(["dev", f"--prometheus-interval={bad}"])
    assert e.value.code == 2
    assert "is not a duration like 5s" in capsys.readouterr().err


@pytest.mark.parametrize("good", ["1s", "500ms", "2m"])
def test_a_prometheus_interval_is_passed_on_as_given(good):
    assert cli.build_parser().parse_args(["dev", "--prometheus-interval", good]) \
        .prometheus_interval == good
    assert cli.build_parser().parse_args(["dev"]).prometheus_interval is None
    assert dev.PROMETHEUS_INTERVAL == "5s"  # what --prometheus scrapes at without it


def test_an_interval_without_prometheus_is_refused_in_one_line(tmp_path, capsys):
    assert cli.main(["dev", "--data", str(tmp_path / "d"), "--prometheus-interval", "1s"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "add --prometheus" in err, err
    assert not (tmp_path / "d").exists()  # refused before anything was made
