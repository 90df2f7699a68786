"""The run's stages in their order: the text branch's (pipelines/stages.py), the interleaved branch's
(pipelines/interleaved.py), then the pairs branch, which recycles the images of the documents the
interleaved stages dropped, and the shards, which mix every branch. `STAGES` here is the full registry;
import it from this module (pipelines/stage.py holds the dict and the `register` contract)."""

from pipelines import interleaved, stages
from pipelines.stage import STAGES, register

register(stages.ImagesStage)
register(stages.PackStage)

__all__ = ["STAGES", "interleaved", "stages"]
