"""Operations (SPEC 12): what an operator asks of the history and the groups."""
