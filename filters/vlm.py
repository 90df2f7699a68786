"""Stage 4, strict VLM scoring: a small VLM (SmolVLM-style, Idefics3) rates each interleaved document.

Pure code (no Beam): `VlmScorer(model).score(docs)` -> one expected rating in [1, 5] per document.

Method: the expected rating from the rating tokens' probabilities (G-Eval: Liu et al. 2023, "G-EVAL: NLG
Evaluation using GPT-4 with Better Human Alignment", the score is sum_r r * p(r) over the score tokens).
Here p(r) comes from teacher forcing, not sampling: ONE forward pass over the prompt, the next-token
distribution at the prompt's last token, restricted to the tokens "1".."5" and renormalised over them.
This gives a continuous score (ties between documents are rare) that is deterministic and costs no decoding.

Prompt (SmolVLM's chat template; one `<image>` per image, the processor expands each into its tokens):

    <|im_start|>User:<image><image>Document text:
    {text, special-token strings removed, cut to max_text_chars}

    {INSTRUCTION}<end_of_utterance>
    Assistant: 

(the trailing space only where the tokenizer splits " 3" into " " + "3", as SmolVLM's does, so that the
next token is the bare digit; see `_answer_tokens`).
"""
import re

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

INSTRUCTION = (
    "Rate how useful this document (its images and its text together) is as image-text pretraining data "
    "for a vision-language model, on a scale from 1 to 5: 1 = useless (spam, boilerplate, images unrelated "
    "to the text), 5 = excellent (informative, well-written text that the images illustrate). "
    "Answer with one digit."
)
DIGITS = "12345"


def rating_prompt(processor, n_images: int, text: str, prefix: str = "") -> str:
    """The chat prompt for one document: its images first, then its text, then INSTRUCTION; ends where
    the assistant's answer starts (generation prompt + `prefix`)."""
    content = [{"type": "image"}] * n_images
    content.append({"type": "text", "text": f"Document text:\n{text}\n\n{INSTRUCTION}"})
    messages = [{"role": "user", "content": content}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + prefix


def _answer_tokens(processor) -> tuple[list[int], str]:
    """Token ids of "1".."5" and the prompt suffix after which the answer is exactly one of them.

    Teacher forcing is only sound if `prompt + "3"` tokenizes as `prompt` then the id of "3". After the
    generation prompt ("Assistant:") a chat model answers " 3"; tokenizers that split digits (SmolLM2's,
    DeepSeek's, Llama 3's) encode that as " " + "3", so the space goes into the prompt. Else no suffix."""
    tok = processor.tokenizer
    ids = []
    for d in DIGITS:
        enc = tok.encode(d, add_special_tokens=False)
        if len(enc) != 1:
            raise ValueError(f"rating digit {d!r} is not a single token for this tokenizer: {enc}")
        ids.append(enc[0])
    base = rating_prompt(processor, 0, "")
    for prefix in (" ", ""):
        head = tok.encode(base + prefix, add_special_tokens=False)
        if all(tok.encode(base + prefix + d, add_special_tokens=False) == head + [i] for d, i in zip(DIGITS, ids)):
            return ids, prefix
    raise ValueError("the tokenizer merges the rating digit with the end of the prompt; cannot teacher-force it")


class VlmScorer:
    """Scores interleaved documents with a SmolVLM-style model (`Idefics3ForConditionalGeneration`).

    `model`: a local folder or a Hub id (with HF_HUB_OFFLINE=1 it must be in the local cache); the model and
    its processor are loaded once, in eval mode, float32, on `device`.

    Images: converted to RGB, shrunk (aspect kept) so the longest edge is at most `max_side`, then given to
    the processor with no image splitting, so each image is ONE tile: the Idefics3 processor then stretches
    it to a `max_side` x `max_side` square (its pixel-shuffle connector needs a square patch grid; this is
    the "global image" view SmolVLM is trained on). Tokens per image = (max_side / patch)^2 / scale_factor^2
    image tokens + 3 wrappers: with the default 512 on SmolVLM-256M (patch 16, scale 4) that is 64 + 3 = 67
    (with splitting on, as SmolVLM ships, a large image would cost up to 17 tiles, ~1,100 tokens).
    `max_side` must be a multiple of patch * scale_factor (64 there).

    `max_text_chars`: the text is cut to this many characters (the prompt length, hence cost, is bounded).

    Not picklable by design (it holds the model): a Beam DoFn should keep only the constructor arguments
    and build the scorer in its setup().
    """

    def __init__(self, model: str, device: str = "cpu", max_side: int = 512, max_text_chars: int = 2000):
        self.device, self.max_side, self.max_text_chars = device, max_side, max_text_chars
        try:
            self.processor = AutoProcessor.from_pretrained(model)
            self.model = AutoModelForImageTextToText.from_pretrained(model, dtype=torch.float32)
        except (OSError, ValueError) as e:  # the library's messages do not always name what was asked for
            raise OSError(f"cannot load the VLM {model!r} (a local folder or a Hub id in the cache): {e}") from e
        self.model.to(device).eval()
        self.digit_ids, self.answer_prefix = _answer_tokens(self.processor)

        # The prompt must say as many <image> per image as the model makes features for a max_side tile.
        patch, scale = self.model.config.vision_config.patch_size, self.model.config.scale_factor
        if max_side % (patch * scale):
            raise ValueError(f"max_side={max_side} must be a multiple of patch_size * scale_factor = {patch * scale}")
        self.image_seq_len = (max_side // patch) ** 2 // scale**2

        # Document text must not smuggle in control strings: a literal "<image>" in a web page would
        # desynchronise images and placeholders (the processor raises for the whole batch), and
        # "<end_of_utterance>" would end the user turn early.
        p, tok = self.processor, self.processor.tokenizer
        control = {t.content for t in tok.added_tokens_decoder.values() if t.special}
        control |= {p.image_token, p.fake_image_token, p.global_image_tag, p.end_of_utterance_token}
        self._control = re.compile("|".join(map(re.escape, sorted(control, key=len, reverse=True))))

    def _clean(self, text: str) -> str:
        while True:  # repeat: removing one control string can join the halves of another
            cleaned = self._control.sub("", text)
            if cleaned == text:
                return text[: self.max_text_chars]
            text = cleaned

    def _image(self, image: Image.Image) -> Image.Image:
        image = image.convert("RGB")  # also a copy, so thumbnail() below does not touch the caller's image
        image.thumbnail((self.max_side, self.max_side), Image.Resampling.LANCZOS)
        return image

    @torch.inference_mode()
    def score(self, docs: list[tuple[list[Image.Image], str]]) -> list[float]:
        """Expected rating sum_r r * p(r), r = 1..5, for each (images, text) document; one forward pass."""
        if not docs:
            return []
        prompts = [rating_prompt(self.processor, len(ims), self._clean(text), self.answer_prefix) for ims, text in docs]
        images = [[self._image(im) for im in ims] for ims, _ in docs]
        inputs = self.processor(
            text=prompts,
            images=images if any(images) else None,  # the image processor raises on a batch without images
            image_seq_len=self.image_seq_len,
            do_image_splitting=False,
            do_resize=False,  # already shrunk above; the processor only squares to max_image_size
            max_image_size={"longest_edge": self.max_side},
            padding=True,
            return_tensors="pt",
        ).to(self.device)
        mask = inputs["attention_mask"]
        # Explicit positions so a padded row sees the same positions as alone, whichever side the padding is.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.model.model(**inputs, position_ids=positions, use_cache=False).last_hidden_state
        # Each row's last real token (cumsum reaches its maximum there first): works for left or right padding.
        last = mask.cumsum(-1).argmax(-1)
        rows = torch.arange(len(docs), device=hidden.device)
        # Only those positions go through the LM head: full logits would be batch x length x vocab floats.
        logits = self.model.get_output_embeddings()(hidden[rows, last]).float()
        logp = torch.log_softmax(logits, dim=-1)[:, self.digit_ids]  # log p(r | prompt) over the whole vocab
        p = torch.softmax(logp, dim=-1)  # renormalised over the five ratings
        ratings = torch.arange(1, 6, dtype=p.dtype, device=p.device)
        return (p * ratings).sum(-1).tolist()
