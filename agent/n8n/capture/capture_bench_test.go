package capture

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"testing"
	"time"
)

// n8nBenchCorpus is a stream of JSON values an agent might print: quoted
// prose (text to Layer) between seed 004 objects. Being valid JSON
// throughout, encoding/json.Decoder can tokenise the very same bytes.
func n8nBenchCorpus(size int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		b.WriteString(`"Let me check that file for you, one moment — ünïcödé ✓ ` + strconv.Itoa(i) + `" `)
		b.WriteString(`{"type":"tool_call","name":"show_diff","args":{"path":"src/main.go","range":{"from":` + strconv.Itoa(i) + `,"to":120},"flags":["a","b {c}"],"note":"escaped \"quote\" and \\ slash"}}` + "\n")
		b.WriteString(`{"messageType":"regular_message","content":"Here is the diff you asked for; lines 10–40 changed. 世界"}` + "\n")
	}
	return b.Bytes()
}

// BenchmarkCaptureLayer feeds a 1 MiB corpus to Layer in 256-byte
// chunks and, in the same iterations, tokenises the same bytes with
// encoding/json.Decoder.Token. It reports both throughputs and their ratio
// (capture-MB/s ÷ jsondec-MB/s; above 1 means the capture layer is faster).
func BenchmarkCaptureLayer(b *testing.B) {
	data := n8nBenchCorpus(1 << 20)
	const chunk = 256
	var capNs, decNs time.Duration
	var outputs, tokens int
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		l := New(0)
		for off := 0; off < len(data); off += chunk {
			outputs += len(l.Feed(data[off:min(off+chunk, len(data))]))
		}
		outputs += len(l.Flush())
		t1 := time.Now()
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			_, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			tokens++
		}
		t2 := time.Now()
		capNs += t1.Sub(t0)
		decNs += t2.Sub(t1)
	}
	if outputs == 0 || tokens == 0 {
		b.Fatal("nothing was produced")
	}
	mb := float64(len(data)) * float64(b.N) / 1e6
	capMBs := mb / capNs.Seconds()
	decMBs := mb / decNs.Seconds()
	b.ReportMetric(capMBs, "capture-MB/s")
	b.ReportMetric(decMBs, "jsondec-MB/s")
	b.ReportMetric(capMBs/decMBs, "capture/jsondec")
}
