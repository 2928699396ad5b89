"""Integer class ids for prompt texts: what ObjectHypothesis.class_id and LabelInfo carry."""

from __future__ import annotations

#: The class id of the box-only concept (exemplar boxes without a prompt) in the detections and
#: LabelInfo: the last uint16, which no prompt is given (``ClassIds``).
BOX_ONLY_CLASS_ID = 65535


class ClassIds:
    """Integer class ids for prompt texts, stable for the node's life.

    A prompt keeps its id while the node runs, through prompt changes, so a detection computed
    just before a change still means what the LabelInfo of its time said. New prompts take the
    next id; ids count up from 0 (the first prompts get 0, 1, ... in order). LabelInfo's
    class_id is a uint16 and its last value is the box-only concept's (``BOX_ONLY_CLASS_ID``):
    once 65,535 distinct prompts have been seen, the ids restart from the prompts in force.
    """

    LIMIT = 65535

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def assign(self, prompts: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
        """(prompt, id) for ``prompts``, giving new prompts the next ids."""
        new = [p for p in dict.fromkeys(prompts) if p not in self._ids]
        if len(self._ids) + len(new) > self.LIMIT:
            self._ids = {}
            new = list(dict.fromkeys(prompts))
        for prompt in new:
            self._ids[prompt] = len(self._ids)
        return tuple((p, self._ids[p]) for p in prompts)
