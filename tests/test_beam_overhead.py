"""pipelines/beam_overhead.py's single-worker stages, in a real 2-process FnApiRunner pipeline: a stage
whose input leaves a worker nothing runs as one bundle; a stage with work for both is still split."""

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to

from pipelines import beam_overhead


def test_a_stage_with_an_empty_part_runs_on_one_worker(monkeypatch):
    beam_overhead.apply()  # (as importing pipelines.stage does)
    bundles = []  # (stage name, elements sent) of every bundle a worker ran
    real = fn_runner.BundleManager.process_bundle

    def counted(self, inputs, *args, **kwargs):
        sizes = [len(b) for chunks in inputs.values() for b in chunks]
        bundles.append((self.bundle_context_manager.stage.name, sum(sizes)))
        return real(self, inputs, *args, **kwargs)

    monkeypatch.setattr(fn_runner.BundleManager, "process_bundle", counted)
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                               "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
    with beam.Pipeline(options=options) as p:
        many = p | "Many" >> beam.Create(list(range(400)), reshuffle=False) | "Key" >> beam.Map(lambda x: (x % 50, x))
        sums = many | "GroupKeys" >> beam.GroupByKey() | "Sum" >> beam.MapTuple(lambda k, xs: (k, sum(xs)))
        total = sums | "Total" >> beam.combiners.Count.Globally()
        assert_that(sums, equal_to([(k, sum(range(k, 400, 50))) for k in range(50)]), label="Sums")
        assert_that(total, equal_to([50]), label="Count")
    by_stage: dict[str, list[int]] = {}
    for stage, size in bundles:
        by_stage.setdefault(stage, []).append(size)
    grouped = [sizes for stage, sizes in by_stage.items() if "(GroupKeys/Read)" in stage]
    counted_once = [sizes for stage, sizes in by_stage.items() 
                    if "(Total/CombineGlobally(CountCombineFn)/CombinePerKey/Group/Read)" in stage]
    assert grouped and all(len(sizes) == 2 and min(sizes) > 0 for sizes in grouped)  # 50 keys: both workers
    assert counted_once and all(len(sizes) == 1 for sizes in counted_once)  # one count: one bundle
