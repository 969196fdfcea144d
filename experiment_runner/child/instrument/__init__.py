"""What a compiler engineer needs beside the timings: compile time, dynamo accounting,
a profiling pass and the cold/warm compile-cache measurement (`pipeline.Instrumentation`)."""
