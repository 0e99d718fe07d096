import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

// Writes a map of byte[] -> byte[] the way Kafka Connect's
// FileOffsetBackingStore.save() does: new ObjectOutputStream(file).writeObject(HashMap<byte[],byte[]>).
public class GenOffsets {
    public static void main(String[] args) throws Exception {
        String out = args[0];
        Map<byte[], byte[]> raw = new HashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            byte[] k = args[i].getBytes(StandardCharsets.UTF_8);
            byte[] v = args[i + 1].equals("<null>") ? null : args[i + 1].getBytes(StandardCharsets.UTF_8);
            raw.put(k, v);
        }
        try (ObjectOutputStream os = new ObjectOutputStream(new FileOutputStream(out))) {
            os.writeObject(raw);
        }
    }
}
