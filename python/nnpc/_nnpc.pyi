"""Type stubs of the Rust core (``nnpc._nnpc``); the public API is ``nnpc``'s."""

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

PARTIAL_SCHEMA: str

class Tape:
    @property
    def batch(self) -> int: ...

class Weights:
    def __init__(self, arrays: Dict[str, np.ndarray]) -> None: ...
    def names(self) -> List[str]: ...
    def shape(self, name: str) -> List[int]: ...
    def get(self, name: str) -> np.ndarray: ...

class Graph:
    def run(
        self,
        weights: Union[None, Dict[str, np.ndarray], Weights] = None,
        inputs: Optional[Dict[str, np.ndarray]] = None,
        batch: Optional[int] = None,
        seed: int = 0,
        random_missing: bool = False,
        dtype: Optional[str] = None,
    ) -> Dict[str, np.ndarray]: ...
    def emulate(
        self,
        weights: Union[None, Dict[str, np.ndarray], Weights] = None,
        inputs: Optional[Dict[str, np.ndarray]] = None,
        batch: Optional[int] = None,
        seed: int = 0,
        random_missing: bool = False,
        dtype: Optional[str] = None,
    ) -> Dict[str, np.ndarray]: ...
    def diff(
        self,
        hardware: Dict[str, np.ndarray],
        weights: Union[None, Dict[str, np.ndarray], Weights] = None,
        inputs: Optional[Dict[str, np.ndarray]] = None,
        batch: Optional[int] = None,
        seed: int = 0,
        random_missing: bool = False,
        first: int = 10,
        maps: bool = False,
    ) -> str: ...
    def diff_part(
        self,
        hardware: Dict[str, np.ndarray],
        inputs: Dict[str, np.ndarray],
        ids: List[int],
        weights: Optional[Dict[str, np.ndarray]] = None,
        seed: int = 0,
        first: int = 10,
        worst: int = 10,
    ) -> str: ...
    def record(
        self, weights: Dict[str, np.ndarray], inputs: Dict[str, np.ndarray]
    ) -> Tuple[Dict[str, np.ndarray], Tape]: ...
    def backward(
        self, tape: Tape, output_grads: Dict[str, np.ndarray]
    ) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]: ...
    def score(
        self,
        data: Dict[str, np.ndarray],
        weights: Optional[Dict[str, np.ndarray]] = None,
        split: str = "test",
        engine: str = "graph",
        loss: Optional[str] = None,
        seed: int = 0,
    ) -> Tuple[float, Optional[float], int]: ...
    def random_weights(self, seed: int = 0) -> Dict[str, np.ndarray]: ...
    def random_inputs(self, start: int, stop: int, seed: int = 0) -> Dict[str, np.ndarray]: ...
    def depgraph_json(self) -> str: ...
    def to_dot(self) -> str: ...
    def swgraph_json(self) -> str: ...
    def declarations(self) -> List[Tuple[str, str, List[int]]]: ...
    def weight_names(self) -> List[str]: ...
    def target(self) -> Tuple[str, int, str]: ...
    def warnings(self) -> List[Dict[str, Any]]: ...
    def source_name(self) -> str: ...

def compile(
    path: Optional[str] = None,
    source: Optional[str] = None,
    name: Optional[str] = None,
    target: Optional[str] = None,
) -> Graph: ...
def quantize(array: np.ndarray, format: str, native: int = 128) -> np.ndarray: ...
def quantize_codes(
    array: np.ndarray, format: str, native: int = 128
) -> Tuple[np.ndarray, np.ndarray]: ...
def merge_parts(parts: List[str]) -> str: ...
def finish_part(part: str) -> Tuple[str, str, int]: ...
def report_html(report: str) -> str: ...
def load_tensors(path: str) -> Dict[str, np.ndarray]: ...
