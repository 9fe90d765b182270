// filled in by the data room
