package events

// DecodeFast is decodeFast, for the equivalence tests.
var DecodeFast = decodeFast
