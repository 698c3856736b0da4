package projections

// Abandon stops consuming without saving: what a crash leaves behind.
func (r *Runner) Abandon() {
	r.cc.Stop()
	<-r.cc.Closed()
	close(r.stop)
	<-r.done
}
