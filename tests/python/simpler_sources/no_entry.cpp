// Exports no kernel_entry (a mistake the runtime must name).
extern "C" void not_the_entry(long* args) { (void)args; }
