package binlog

import (
	"context"
	"database/sql"
	"time"
)

// filesBehindInterval is how often the binlog list is compared with the
// file being read.
const filesBehindInterval = 15 * time.Second

// watchFilesBehind keeps m.BinlogFilesBehind at the number of binlog files
// the server wrote after the one the stream is in, until ctx is done. A
// failed query leaves the gauge as it was: this is monitoring, not a reason
// to stop.
func (s *Source) watchFilesBehind(ctx context.Context, db *sql.DB) {
	t := time.NewTicker(filesBehindInterval)
	defer t.Stop()
	for {
		if cur := s.curFile.Load(); cur != nil {
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			files, err := binaryLogs(qctx, db)
			cancel()
			if err == nil {
				s.m.BinlogFilesBehind.Set(float64(filesAfter(files, *cur)))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// filesAfter counts the files listed after cur (all of them if cur is not
// listed, e.g. purged).
func filesAfter(files []binlogFile, cur string) int {
	for i, f := range files {
		if f.name == cur {
			return len(files) - 1 - i
		}
	}
	return len(files)
}
