"""What the service already knows. Today: the playbook library (semantic memory's DAG templates), chosen by
keywords. The memory issue adds embeddings, FAISS indexes, episodic memory and the semantic cache here."""

from memory.playbooks import NodeTemplate, Playbook, PlaybookLibrary, load_playbooks

__all__ = ["NodeTemplate", "Playbook", "PlaybookLibrary", "load_playbooks"]
