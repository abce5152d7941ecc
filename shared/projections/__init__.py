"""Pure folds of the log that more than one service's projection keeps (`cluster`)."""
