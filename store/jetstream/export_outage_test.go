package jetstream

// TurnJetStreamOff turns the server's JetStream off, as the server does
// itself after a write it could not make.
func TurnJetStreamOff(s *Server) { _ = s.srv.ShutdownJetStream() }
