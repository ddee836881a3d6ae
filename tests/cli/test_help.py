"""Every command's --help renders (option help texts go through argparse's %-formatting)."""

import pytest

from strata.cli.main import main

COMMANDS = [["serve"], ["generate"], ["chat"], ["bench", "offline"], ["bench", "serve"], ["bench", "multiturn"],
            ["bench", "kernels"], ["profile"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_renders(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: strata" in out and "--help" in out
