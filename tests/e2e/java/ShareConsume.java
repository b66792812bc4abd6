// A plain Java KafkaShareConsumer (kafka-clients 4.x), used by the e2e tests as a third-party client.
// Usage: ShareConsume <bootstrap> <group> <topic> <expected> <timeoutMs> [client.properties]
// (the optional properties file adds client settings: security.protocol, sasl.jaas.config, ...)
// Prints one line per record: "<partition> <offset> <deliveryCount>", then "DONE <n>".
import java.io.FileInputStream;
import java.io.IOException;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;

public class ShareConsume {
    public static void main(String[] args) throws IOException {
        Properties props = new Properties();
        if (args.length > 5) {
            try (FileInputStream in = new FileInputStream(args[5])) {
                props.load(in);
            }
        }
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        props.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        int expected = Integer.parseInt(args[3]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]);
        int seen = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            while (seen < expected && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    System.out.println(r.partition() + " " + r.offset() + " " + r.deliveryCount().orElse((short) -1));
                    seen++;
                }
            }
            consumer.commitSync();
        }
        System.out.println("DONE " + seen);
    }
}
