"""Consumer Lambda: delay queue -> wait to the exact ms -> verify the row -> deliver -> delete."""
