"""What a run leaves behind: run directories, atomic JSON, emitted commands."""
