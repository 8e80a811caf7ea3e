"""What may leave the program about learners: the cell key method and thresholds, keyed
pseudonyms, and redaction of identifiers and secrets in everything shown or kept."""
