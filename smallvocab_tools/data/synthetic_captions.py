"""A synthetic image-captioning set, generated from a seed: scenes rendered
into image feature vectors, each with several differently worded captions.

A scene has 1-3 objects (a noun class, an attribute, a count 1-4 and a
distinct position) and a place.  Concepts are drawn from Zipf distributions,
so the caption vocabulary has a long tail.  The image feature is like a
CNN's: non-negative and sparse, every concept (object class, attribute,
count, place) activating its own random set of units with random strengths
(0.5-1.5), the object's, attribute's and count's sets shifted by the object's
position (which binds them to it), plus |noise| on every unit:

    f = u(q) + sum_j shift_{p_j}(u(o_j) + u(a_j) + u(c_j)) + |noise|     (d_f values, 4096 by default)

Every caption of a scene names the same objects, counts and place with other
words: each noun has two names (and a plural form for counts above one),
attributes and places two wordings, counts and positions several, and the
captions use different templates, sometimes leave the attribute or the place
out.  The vocabulary (several thousand words) is thus predictable from the
feature and captioning is learnable.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from smallvocab_tools.data.synthetic_lexicon import make_words

SYLLABLES = [c + v for c in ("b", "c", "d", "f", "g", "l", "m", "n", "p", "r", "s", "t", "v", "w")
             for v in ("a", "e", "i", "o", "u", "ai", "ee", "oo")]
COUNT_WORDS = {1: ["a", "one"], 2: ["two", "a pair of"], 3: ["three", "a group of three"], 4: ["four", "many"]}
POSITIONS = [["on the left", "at the left side"], ["on the right", "at the right side"],
             ["at the top", "up above"], ["at the bottom", "down below"],
             ["in the middle", "at the center"], ["in the front", "in the foreground"]]
PLACE_PREPS = ["in", "at", "near"]
TEMPLATES = 6


@dataclass
class CaptionConfig:
    n_objects: int = 1200
    n_attributes: int = 400
    n_places: int = 300
    captions_per_image: int = 5
    train_images: int = 10000
    valid_images: int = 500
    test_images: int = 500
    feature_dim: int = 4096
    active_units: int = 24  # units each concept activates
    noise: float = 0.1  # std of the noise on every unit (active units have strength 0.5-1.5)
    zipf_exponent: float = 1.0
    seed: int = 1

    def validate(self):
        for name in ("n_objects", "n_attributes", "n_places", "captions_per_image", "train_images",
                     "feature_dim", "active_units"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.captions_per_image > TEMPLATES:
            raise ValueError(f"at most {TEMPLATES} differently worded captions per image, got "
                             f"{self.captions_per_image}")
        if self.noise < 0:
            raise ValueError(f"noise must be >= 0, got {self.noise}")


def _zipf(n, exponent):
    p = 1.0 / np.arange(1, n + 1) ** exponent
    return p / p.sum()


class CaptionWorld:
    """The lexicon, the concept codes and the projections, from the seed."""

    def __init__(self, cfg: CaptionConfig):
        cfg.validate()
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        taken = set(w for words in COUNT_WORDS.values() for phrase in words for w in phrase.split())
        taken |= set(w for pair in POSITIONS for phrase in pair for w in phrase.split()) | set(PLACE_PREPS)
        taken |= {"and", "there", "is", "are", "photo", "of", "an", "image", "showing", "we", "can", "see",
                  "next", "to", ",", "with", "picture"}

        def words(n):
            out = make_words(rng, SYLLABLES, n, taken)
            taken.update(out)
            taken.update(w + "s" for w in out)  # plurals stay distinct from every other word
            return out

        names = words(2 * cfg.n_objects)
        self.nouns = [(names[i], names[cfg.n_objects + i]) for i in range(cfg.n_objects)]
        adjectives = words(2 * cfg.n_attributes)
        self.attributes = [(adjectives[i], adjectives[cfg.n_attributes + i]) for i in range(cfg.n_attributes)]
        places = words(2 * cfg.n_places)
        self.places = [(places[i], places[cfg.n_places + i]) for i in range(cfg.n_places)]
        n_concepts = cfg.n_objects + cfg.n_attributes + 4 + cfg.n_places
        active = min(cfg.active_units, cfg.feature_dim)
        self.units = np.stack([rng.choice(cfg.feature_dim, size=active, replace=False) for _ in range(n_concepts)])
        self.strength = rng.uniform(0.5, 1.5, size=(n_concepts, active))
        self.first = {"obj": 0, "attr": cfg.n_objects, "count": cfg.n_objects + cfg.n_attributes,
                      "place": cfg.n_objects + cfg.n_attributes + 4}
        self.p_obj = _zipf(cfg.n_objects, cfg.zipf_exponent)
        self.p_attr = _zipf(cfg.n_attributes, cfg.zipf_exponent)
        self.p_place = _zipf(cfg.n_places, cfg.zipf_exponent)

    def scene(self, rng) -> Dict:
        n = int(rng.choice([1, 2, 3], p=[0.3, 0.45, 0.25]))
        objects = rng.choice(self.cfg.n_objects, size=n, replace=False, p=self.p_obj)
        return {"objects": [int(o) for o in objects],
                "attributes": [int(a) for a in rng.choice(self.cfg.n_attributes, size=n, p=self.p_attr)],
                "counts": [int(c) for c in rng.choice([1, 2, 3, 4], size=n, p=[0.5, 0.25, 0.15, 0.1])],
                "positions": [int(p) for p in rng.choice(len(POSITIONS), size=n, replace=False)],
                "place": int(rng.choice(self.cfg.n_places, p=self.p_place))}

    def feature(self, scene, rng) -> np.ndarray:
        d = self.cfg.feature_dim
        f = np.abs(self.cfg.noise * rng.standard_normal(d))

        def add(concept, shift=0):
            np.add.at(f, (self.units[concept] + shift) % d, self.strength[concept])

        add(self.first["place"] + scene["place"])
        for o, a, c, p in zip(scene["objects"], scene["attributes"], scene["counts"], scene["positions"]):
            shift = p * (d // len(POSITIONS))
            for concept in (self.first["obj"] + o, self.first["attr"] + a, self.first["count"] + c - 1):
                add(concept, shift)
        return f.astype(np.float32)

    def caption(self, scene, template: int, rng) -> str:
        def pick(options):
            return options[int(rng.integers(len(options)))]

        nps = []
        for o, a, c, p in zip(scene["objects"], scene["attributes"], scene["counts"], scene["positions"]):
            noun = pick(self.nouns[o]) + ("s" if c > 1 else "")
            adj = [pick(self.attributes[a])] if rng.random() < 0.75 else []
            nps.append((" ".join([pick(COUNT_WORDS[c])] + adj + [noun]), pick(POSITIONS[p])))
        place = f"{pick(PLACE_PREPS)} the {pick(self.places[scene['place']])}" if rng.random() < 0.8 else ""
        with_pos = " and ".join(f"{np_} {pos}" for np_, pos in nps)
        bare = " and ".join(np_ for np_, _ in nps)
        verb = "are" if scene["counts"][0] > 1 else "is"
        text = [f"{with_pos} {place}",
                f"there {verb} {with_pos} {place}",
                f"a photo of {bare} {place}",
                f"{place} , {with_pos}" if place else with_pos,
                f"an image showing {with_pos} {place}",
                f"we can see {bare} {place}"][template]
        return " ".join(text.split())


def generate(cfg: CaptionConfig) -> Dict[str, Tuple[np.ndarray, List[str], np.ndarray]]:
    """{split: (features (images x d_f, float32), captions, image row of each caption)}."""
    world = CaptionWorld(cfg)
    out = {}
    for i, (split, n) in enumerate([("train", cfg.train_images), ("valid", cfg.valid_images),
                                    ("test", cfg.test_images)]):
        rng = np.random.default_rng([cfg.seed, i])
        feats = np.empty((n, cfg.feature_dim), dtype=np.float32)
        captions, index = [], []
        for row in range(n):
            scene = world.scene(rng)
            feats[row] = world.feature(scene, rng)
            for template in rng.permutation(TEMPLATES)[: cfg.captions_per_image]:
                captions.append(world.caption(scene, int(template), rng))
                index.append(row)
        out[split] = (feats, captions, np.asarray(index, dtype=np.int64))
    return out


def write_captions(out_dir, cfg: CaptionConfig, lang="en"):
    """RAW/{split}.{lang} (one caption per line), {split}.npy (features, one
    row per image), {split}.index (each caption's image row) and config.json;
    what scripts/prepare_captions.py binarizes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stats = {}
    for split, (feats, captions, index) in generate(cfg).items():
        (out / f"{split}.{lang}").write_text("\n".join(captions) + "\n")
        np.save(out / f"{split}.npy", feats)
        (out / f"{split}.index").write_text("\n".join(map(str, index.tolist())) + "\n")
        stats[split] = {"images": len(feats), "captions": len(captions),
                        "types": len({w for c in captions for w in c.split()})}
    (out / "config.json").write_text(json.dumps({"config": asdict(cfg), "stats": stats}, indent=2) + "\n")
    return stats
