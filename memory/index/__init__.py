"""Vector indexes: one contract (abstract.py), an in-memory twin, and two FAISS implementations."""

from memory.index.abstract import VectorIndex
from memory.index.faiss_flat import FlatIndex
from memory.index.faiss_hnsw import HNSWIndex
from memory.index.memory import NumpyIndex
from memory.index.partitioned import PartitionedIndex

__all__ = ["FlatIndex", "HNSWIndex", "NumpyIndex", "PartitionedIndex", "VectorIndex"]
