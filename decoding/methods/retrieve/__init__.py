"""Retrieval drafting: REST's datastore and SuffixDecoding's suffix cache."""
