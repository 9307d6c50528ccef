"""The consumer groups' incident actions offline: move a group's committed offsets
(reset.py), and its dead letters: why each died, export them, put them back."""
