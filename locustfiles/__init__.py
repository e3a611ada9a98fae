"""Locust side: ChatUser conversations, the journal writer, online judgement, load shapes."""
