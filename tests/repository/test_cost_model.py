"""bench/cost_model.py --check: a step over its budget fails naming the step, its count and its
budget; within budget every step is printed with its margin. The counts are given here (callgrind
itself runs in CI's .ci/cost-model, not in the suite: it takes a minute)."""

import importlib.util
import os
import re

import pytest

from helpers.paths import REPO

BENCH = os.path.join(REPO, "bench")
_spec = importlib.util.spec_from_file_location("cost_model", os.path.join(BENCH, "cost_model.py"))
cost_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cost_model)

BUDGETS = {"parse+map": 100_000, "stage": 50_000, "recompute": 20_000, "commit": 1_000}


def test_a_step_over_its_budget_fails_naming_step_count_and_budget():
    counts = {"parse+map": 99_999.5, "stage": 51_234.5, "recompute": 20_000, "commit": 10}
    over, lines = cost_model.check(counts, BUDGETS)
    assert over
    failures = [line for line in lines if line.startswith("Over budget")]
    # 51,234.5 shows as 51,234 or 51,235 depending on rounding: either names the count.
    assert len(failures) == 1 and re.fullmatch(
        r"Over budget: step stage costs 51,23[45] instructions per statement, its budget is 50,000 .*",
        failures[0]), failures


def test_within_budget_every_step_is_printed_with_count_budget_and_margin():
    counts = {"parse+map": 97_000, "stage": 50_000, "recompute": 1_234, "commit": 999.9}
    over, lines = cost_model.check(counts, BUDGETS)
    assert not over  # a count equal to its budget is within it
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows == {"parse+map": ["97,000", "100,000", "+3,000", "(+3.0%)"],
                    "stage": ["50,000", "50,000", "+0", "(+0.0%)"],
                    "recompute": ["1,234", "20,000", "+18,766", "(+93.8%)"],
                    "commit": ["1,000", "1,000", "+0", "(+0.0%)"]}


def test_the_command_exits_1_over_budget_and_0_within(monkeypatch, capsys):
    budgets = cost_model.load_budgets(cost_model.BUDGETS)
    monkeypatch.setattr(cost_model, "interpreter", lambda python: [budgets["python"], budgets["sqlite"]])
    monkeypatch.setattr("sys.argv", ["cost_model.py", "--check"])
    within = {step: budget - 1 for step, budget in budgets["steps"].items()}
    asked = []

    def measured(counts):
        # The budgets are the standard library's JSON path: --check asks for it, whatever is installed.
        return lambda statements, python, naive, pythonpath, parser: asked.append(parser) or (dict(counts), parser)

    monkeypatch.setattr(cost_model, "measure", measured(within))
    assert cost_model.main() == 0
    out = capsys.readouterr().out
    assert "Over budget" not in out and "JSON parser stdlib" in out and asked == ["stdlib"]
    assert "orjson's path not measured: no --pythonpath to import it from." in out
    over = dict(within, recompute=budgets["steps"]["recompute"] + 1)
    monkeypatch.setattr(cost_model, "measure", measured(over))
    assert cost_model.main() == 1
    assert (f"Over budget: step recompute costs {over['recompute']:,} instructions per statement, "
            f"its budget is {budgets['steps']['recompute']:,}") in capsys.readouterr().out


def test_with_a_pythonpath_orjson_s_path_is_held_to_its_own_budget(monkeypatch, capsys):
    budgets = cost_model.load_budgets(cost_model.BUDGETS)
    monkeypatch.setattr(cost_model, "interpreter", lambda python: [budgets["python"], budgets["sqlite"]])
    monkeypatch.setattr("sys.argv", ["cost_model.py", "--check", "--pythonpath", "/tmp/orjson-site"])
    within = {step: budget - 1 for step, budget in budgets["steps"].items()}
    fast = budgets["orjson"]["parse+map"]
    asked = []

    def measured(parse_map, found="orjson"):
        def measure(statements, python, naive, pythonpath, parser):
            asked.append((parser, pythonpath))
            counts = dict(within, **{"parse+map": parse_map}) if parser == "orjson" else dict(within)
            return counts, found if parser == "orjson" else parser
        return measure

    monkeypatch.setattr(cost_model, "measure", measured(fast))
    assert cost_model.main() == 0
    out = capsys.readouterr().out
    assert asked == [("stdlib", "/tmp/orjson-site"), ("orjson", "/tmp/orjson-site")]
    assert "JSON parser orjson" in out and "Over budget" not in out
    monkeypatch.setattr(cost_model, "measure", measured(fast + 1))
    assert cost_model.main() == 1
    assert (f"Over budget: step parse+map costs {fast + 1:,} instructions per statement, its budget is {fast:,} "
            "(bench/cost_budget.toml, [orjson]).") in capsys.readouterr().out
    # A directory orjson cannot be imported from: the workload falls back to the standard library's path.
    monkeypatch.setattr(cost_model, "measure", measured(fast, found="stdlib"))
    assert cost_model.main() == 2
    assert ("The workload used the JSON parser stdlib, not orjson: can orjson be imported from /tmp/orjson-site?"
            in capsys.readouterr().err)


def test_another_interpreter_is_refused_not_measured(monkeypatch, capsys):
    monkeypatch.setattr(cost_model, "interpreter", lambda python: ["3.13.5", "3.46.1"])
    monkeypatch.setattr(cost_model, "measure", lambda *args, **kwargs: pytest.fail("measured"))
    monkeypatch.setattr("sys.argv", ["cost_model.py", "--check"])
    assert cost_model.main() == 2
    assert "has 3.13.5 and 3.46.1" in capsys.readouterr().err


def test_the_committed_budgets_cover_every_step_each_with_its_measurement(tmp_path):
    budgets = cost_model.load_budgets(cost_model.BUDGETS)
    assert set(budgets["steps"]) == set(cost_model.STEPS)
    with open(cost_model.BUDGETS, encoding="utf-8") as handle:
        text = handle.read()
    assert "raised only in a commit that says why" in text
    for table, steps in (("[steps]", cost_model.STEPS), ("[orjson]", cost_model.ORJSON_STEPS)):
        section = text.split(table + "\n", 1)[1].split("\n[", 1)[0]
        for step in steps:
            # e.g. "parse+map" = 114_493  # 111,158 measured at d2cf416 on 2026-12-01, + 3%
            line = re.search(rf'^"{re.escape(step)}" = [\d_]+ +# ([\d,]+) measured at [0-9a-f]{{7,}} on '
                             r'\d{4}-\d\d-\d\d', section, re.MULTILINE)
            assert line, f"no budget line with its measurement for {step} in {table}"
    broken = tmp_path / "budgets.toml"
    broken.write_text(text.replace('"commit" =', '"publish" ='))
    with pytest.raises(cost_model.BudgetError, match="unknown: commit, publish"):
        cost_model.load_budgets(str(broken))
    broken.write_text(text.split("[orjson]")[0])
    with pytest.raises(cost_model.BudgetError, match=r"missing: orjson; steps missing or unknown: parse\+map"):
        cost_model.load_budgets(str(broken))


def test_by_statement_the_recompute_is_its_statements_and_the_python_between_them():
    # setup, warm, parse+map, stage; the recompute: Python, a statement, Python, a statement, Python; commit; exit.
    totals = [1, 2, 30, 40, 5, 100, 6, 200, 7, 8, 9]
    output = ("json parser: stdlib\nstatement: grains.py:rebuild_partitions:160\n"
              "statement: grains.py:move_presence:228\n")
    counts = cost_model.split_parts(totals, output, naive=False, by_statement=True)
    assert counts == {"setup": 1, "warm": 2, "parse+map": 30, "stage": 40, "recompute": 318, "commit": 8,
                      cost_model.PYTHON_BETWEEN: 18, "grains.py:rebuild_partitions:160": 100,
                      "grains.py:move_presence:228": 200}
    assert cost_model.split_parts(totals, output, naive=False, by_statement=False) == {
        "setup": 1, "warm": 2, "parse+map": 30, "stage": 40, "recompute": 318, "commit": 8}
    with pytest.raises(SystemExit, match="callgrind counted 10 parts, not 11"):
        cost_model.split_parts(totals[1:], output, naive=False, by_statement=True)


def test_floors_follow_the_steps_and_the_grains_rows_are_their_statements_places():
    # The steps as with --by-statement (the recompute: Python, PRESENCE, Python, move_presence twice, Python), the
    # commit, then the floors, each after what sets its data up, then the exit.
    floors = [50, 51, 52, 53, 54, 55, 56]
    totals = [1, 2, 30, 40, 5, 100, 6, 200, 7, 300, 9, 8, *floors, 10]
    output = ("json parser: orjson\nstatement: grains.py:rebuild_partitions:185\n"
              "statement: grains.py:move_presence:257\nstatement: grains.py:move_presence:257\n"
              "presence: grains.py:rebuild_partitions:185\n")
    counts = cost_model.split_parts(totals, output, naive=False, by_statement=True, floors=True)
    assert [counts[part] for part in cost_model.FLOOR_PARTS] == floors
    assert counts["recompute"] == 627 and counts["commit"] == 8
    assert counts[cost_model.PRESENCE] == 100 and counts[cost_model.MOVING] == 500
    with pytest.raises(SystemExit, match="PRESENCE from 0 places, not 1"):
        cost_model.split_parts(totals, output.replace("presence:", "other:"), naive=False, by_statement=True,
                               floors=True)


def test_floors_are_shown_under_their_steps_and_summed_against_the_parser_s_target(capsys):
    counts = {"parse+map": 100_000, "decode": 40_000, "record keys": 7_000, "marshal dumps": 3_000,
              "stage": 35_000, "marshal loads": 3_000, "staged insert": 30_000,
              "recompute": 75_000, cost_model.PRESENCE: 14_000, cost_model.MOVING: 13_000, "commit": 500}
    cost_model.print_floors(counts, "orjson")
    lines = capsys.readouterr().out.splitlines()
    sums = [line.split("  ")[1:] for line in lines if line.startswith(("  floors ", "  as written today "))]
    assert [[field.strip() for field in fields if field] for fields in sums] == [
        ["floors", "50,000", "50% of the step; the rest 50,000"],
        ["floors", "33,000", "94% of the step; the rest 2,000"],
        ["as written today", "27,000", "36% of the step; the rest 48,000"]]
    assert "refresh total, JSON parser orjson, against issue 23's target of 85,000:" in lines
    assert lines[-3:] == ["  the floors' sum                         83,000 = 0.98 x the target",
                          "  + the grains' rows as written today    110,000 = 1.29 x the target",
                          "  today                                  210,500 = 2.48 x the target"]
