package writeback_test

import (
	"context"
	"fmt"

	"github.com/hoard-io/hoard/internal/writeback"
)

type printSink struct{}

func (printSink) Persist(_ context.Context, w writeback.Write) error {
	fmt.Printf("persist %s/%s (%d bytes)\n", w.Bucket, w.Key, len(w.Data))
	return nil
}

func Example() {
	q, err := writeback.New(writeback.Config{Sink: printSink{}})
	if err != nil {
		panic(err)
	}
	done := q.Enqueue(writeback.Write{Bucket: "photos", Key: "cat.jpg", Data: []byte("meow")})
	// The application's write was acknowledged already; done says when
	// (and whether) the store has it.
	fmt.Println("outcome:", <-done)
	// On shutdown, Close persists what is still queued, for as long as its
	// context allows.
	if err := q.Close(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// persist photos/cat.jpg (4 bytes)
	// outcome: <nil>
}
