"""What a workspace file is, by where it sits. Its own module so that the models (and so
every command's start) need not load the tree reader, its archive code and its
dataclasses."""

from enum import StrEnum


class FileKind(StrEnum):
    ROLLOUT = "rollout"
    RAW_MEMORY = "raw_memory"
    ROLLOUT_SUMMARY = "rollout_summary"
    MEMORY_INDEX = "memory_index"
    MEMORY_SUMMARY = "memory_summary"
    RAW_MEMORIES_MERGED = "raw_memories_merged"
    SELECTION = "selection"
    SKILL = "skill"
    WORKSPACE_FILE = "workspace_file"
    DIRECTORY = "directory"
