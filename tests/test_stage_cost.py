"""A stage's cost: Beam's per-transform execution time summed over the transforms the stage added."""

from pipelines.stats import format_table, stage_costs


def test_each_transform_is_charged_to_the_stage_that_added_it():
    labels = {"read": {"read/Open", "read/Parse"}, "quality": {"quality/ParDo(Rules)", "Shared/Write"}}
    msecs = {"read/Open": 10, "read/Parse": 30, "quality/ParDo(Rules)": 100, "Shared/Write": 20, "Audit/Check": 40}
    cost = stage_costs(msecs, labels, pages=20, core_s=1.0)
    assert cost["stages"] == {"read": {"ms": 40, "ms_per_page": 2.0}, "quality": {"ms": 120, "ms_per_page": 6.0}}
    assert cost["outside_stages"] == {"ms": 40, "ms_per_page": 2.0}
    assert cost["transforms_ms_per_page"] == 10.0
    assert cost["runner_ms_per_page"] == 40.0  # (1,000 ms of worker time - 200 charged) / 20 pages
    line = format_table({"stages": [], "cost": cost})
    assert "read 2.00, quality 6.00; outside stages 2.00; in transforms 10.00, runner and idle 40.00" in line


def test_no_pages_read_gives_no_per_page_figures():
    cost = stage_costs({"read/Open": 5}, {"read": {"read/Open"}}, pages=0, core_s=2.0)
    assert cost["stages"]["read"] == {"ms": 5, "ms_per_page": None} and cost["runner_ms_per_page"] is None
    assert "cost" not in format_table({"stages": [], "cost": cost})


def test_the_parts_a_runner_expands_a_transform_into_are_charged_to_its_stage():
    labels = {"quality": {"quality/TemplateLines", "quality/TemplateLines/CountLinePages"}}
    msecs = {"quality/TemplateLines/CountLinePages/CombinePerKey(CountCombineFn)/Precombine": 7,
             "quality/TemplateLines/JoinLines/CoGroupByKeyImpl/Flatten/Transcode/1": 5,
             "qualityx/Other": 3, "Audit/Provenance/Sum/Merge": 2}
    cost = stage_costs(msecs, labels, pages=1, core_s=1.0)
    assert cost["stages"]["quality"]["ms"] == 12 and cost["outside_stages"]["ms"] == 5
