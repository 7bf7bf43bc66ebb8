"""The training prompts: rows loaded from a file or the hub, checked against the fields the
rewards need, rendered with the chat template and handed out in a resumable order."""
