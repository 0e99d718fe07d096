package testenv

import (
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// jsonFront speaks the AWS JSON 1.0 protocol of SQS (what the SDK sends
// by default) for the operations the SQS sink uses, and translates each
// request into the query protocol for the splitter and goaws behind it,
// and the XML answer back into JSON: SendMessageBatch, GetQueueUrl,
// GetQueueAttributes, ListQueues. Anything else is answered 400.
type jsonFront struct {
	next http.Handler // the splitter
}

type jsonAttr struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue,omitempty"`
	BinaryValue []byte `json:"BinaryValue,omitempty"` // base64 in JSON
}

func (f *jsonFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	var in map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		jsonError(w, "InvalidParameterValue", err.Error(), "Sender")
		return
	}
	str := func(k string) string {
		var s string
		json.Unmarshal(in[k], &s)
		return s
	}
	form := url.Values{"Action": {op}, "Version": {"2012-11-05"}}
	switch op {
	case "SendMessageBatch":
		form.Set("QueueUrl", str("QueueUrl"))
		var entries []struct {
			ID                     string              `json:"Id"`
			MessageBody            string              `json:"MessageBody"`
			MessageGroupID         string              `json:"MessageGroupId"`
			MessageDeduplicationID string              `json:"MessageDeduplicationId"`
			MessageAttributes      map[string]jsonAttr `json:"MessageAttributes"`
		}
		json.Unmarshal(in["Entries"], &entries)
		for i, e := range entries {
			p := fmt.Sprintf("SendMessageBatchRequestEntry.%d.", i+1)
			form.Set(p+"Id", e.ID)
			form.Set(p+"MessageBody", e.MessageBody)
			if e.MessageGroupID != "" {
				form.Set(p+"MessageGroupId", e.MessageGroupID)
			}
			if e.MessageDeduplicationID != "" {
				form.Set(p+"MessageDeduplicationId", e.MessageDeduplicationID)
			}
			names := make([]string, 0, len(e.MessageAttributes))
			for n := range e.MessageAttributes {
				names = append(names, n)
			}
			sort.Strings(names)
			for j, n := range names {
				a := e.MessageAttributes[n]
				q := fmt.Sprintf("%sMessageAttribute.%d.", p, j+1)
				form.Set(q+"Name", n)
				form.Set(q+"Value.DataType", a.DataType)
				if a.BinaryValue != nil {
					form.Set(q+"Value.BinaryValue", base64.StdEncoding.EncodeToString(a.BinaryValue))
				} else {
					form.Set(q+"Value.StringValue", a.StringValue)
				}
			}
		}
	case "GetQueueUrl":
		form.Set("QueueName", str("QueueName"))
	case "GetQueueAttributes":
		form.Set("QueueUrl", str("QueueUrl"))
		var names []string
		json.Unmarshal(in["AttributeNames"], &names)
		for i, n := range names {
			form.Set(fmt.Sprintf("AttributeName.%d", i+1), n)
		}
	case "ListQueues":
	default:
		jsonError(w, "InvalidAction", "not translated: "+op, "Sender")
		return
	}
	req, _ := http.NewRequest(http.MethodPost, "/", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := &captured{header: http.Header{}, status: http.StatusOK}
	f.next.ServeHTTP(rec, req)
	if rec.status != http.StatusOK {
		var er struct {
			Type    string `xml:"Error>Type"`
			Code    string `xml:"Error>Code"`
			Message string `xml:"Error>Message"`
		}
		xml.Unmarshal(rec.body.Bytes(), &er)
		jsonError(w, er.Code, er.Message, er.Type)
		return
	}
	var out any
	body := rec.body.Bytes()
	switch op {
	case "SendMessageBatch":
		var x struct {
			OK []struct {
				ID        string `xml:"Id" json:"Id"`
				MessageID string `xml:"MessageId" json:"MessageId"`
				MD5       string `xml:"MD5OfMessageBody" json:"MD5OfMessageBody"`
			} `xml:"SendMessageBatchResult>SendMessageBatchResultEntry"`
			Failed []struct {
				ID          string `xml:"Id" json:"Id"`
				Code        string `xml:"Code" json:"Code"`
				Message     string `xml:"Message" json:"Message"`
				SenderFault bool   `xml:"SenderFault" json:"SenderFault"`
			} `xml:"SendMessageBatchResult>BatchResultErrorEntry"`
		}
		xml.Unmarshal(body, &x)
		res := map[string]any{"Successful": x.OK}
		if x.OK == nil {
			res["Successful"] = []any{}
		}
		if len(x.Failed) > 0 {
			res["Failed"] = x.Failed
		} else {
			res["Failed"] = []any{}
		}
		out = res
	case "GetQueueUrl":
		var x struct {
			URL string `xml:"GetQueueUrlResult>QueueUrl"`
		}
		xml.Unmarshal(body, &x)
		out = map[string]string{"QueueUrl": x.URL}
	case "GetQueueAttributes":
		var x struct {
			Attrs []struct {
				Name  string `xml:"Name"`
				Value string `xml:"Value"`
			} `xml:"GetQueueAttributesResult>Attribute"`
		}
		xml.Unmarshal(body, &x)
		m := map[string]string{}
		for _, a := range x.Attrs {
			m[a.Name] = a.Value
		}
		out = map[string]any{"Attributes": m}
	case "ListQueues":
		var x struct {
			URLs []string `xml:"ListQueuesResult>QueueUrl"`
		}
		xml.Unmarshal(body, &x)
		out = map[string]any{"QueueUrls": x.URLs}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	json.NewEncoder(w).Encode(out)
}

// jsonError answers as SQS does in JSON 1.0: the error type in the body,
// the query-protocol code and fault in X-Amzn-Query-Error.
func jsonError(w http.ResponseWriter, code, msg, typ string) {
	fault := "Sender"
	if typ == "Receiver" {
		fault = "Receiver"
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Query-Error", code+";"+fault)
	status := http.StatusBadRequest
	if fault == "Receiver" {
		status = http.StatusInternalServerError
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + code, "message": msg})
}

// captured is an http.ResponseWriter that keeps the answer.
type captured struct {
	header http.Header
	status int
	body   bytesBuilder
}

func (c *captured) Header() http.Header { return c.header }
func (c *captured) WriteHeader(s int)   { c.status = s }
func (c *captured) Write(b []byte) (int, error) {
	return c.body.Write(b)
}

var _ io.Writer = (*captured)(nil)

// bytesBuilder is a strings.Builder that also hands out its bytes.
type bytesBuilder struct{ strings.Builder }

func (b *bytesBuilder) Bytes() []byte { return []byte(b.String()) }
